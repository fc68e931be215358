/*
 * gpuperf-hook: Slurm's Prolog, Epilog and TaskProlog without a Python interpreter, when the node
 * daemon can do the work: one request, one reply, exit.
 *
 *   /opt/gpuperf/bin/gpuperf-prolog, gpuperf-epilog, gpuperf-taskprolog -> gpuperf-hook
 *
 * Why it exists: slurmd starts each hook as a fresh process, and a Python interpreter's start alone
 * costs 15-20 ms of the 20 ms gpuperf may add at job start (Prolog + TaskProlog) and at job end.
 * The daemon already runs the prolog's steps when asked (gpuperf/prolog/fast.py, daemon/hooksock.py).
 *
 * What it owns: reading the four [daemon] keys it needs from the config (a tiny TOML subset that
 * bails out on anything whose reading could differ from tomllib's), the environment filters
 * (gpuperf.prolog.fast.hook_env; + gpuperf.env.plan.VARIABLE_CLASSES for the TaskProlog; the test
 * tests/unit/test_hook_client.py keeps the lists equal), the request, and a strict reading of the
 * reply. Prolog/Epilog (root): <socket_dir>/hook.sock, SOCK_SEQPACKET, one message each way.
 * TaskProlog (job user): <user_socket_dir>/user.sock, SOCK_STREAM, one length-prefixed part each way
 * (gpuperf/files/framing.py); it prints the reply's "out" and may create the step's record file.
 *
 * On ANY doubt (config it cannot read exactly, daemon absent, slow, declining, a reply it does not
 * understand) it execs <bin>/../venv/bin/gpuperf-<mode>, the Python hook that does everything itself,
 * with GPUPERF_HOOK_FALLBACK="<declined|down|client>: <why>" added to its environment. gpuperf's own
 * failure never fails a job: if even that exec fails, every mode exits 0 with a message on stderr.
 *
 * C11 + libc only. Over 400 lines in one file: the build is one gcc call (packaging/build-hook.sh),
 * and the config reader, request writer and reply reader share a handful of bounded static buffers.
 * Every buffer is fixed (request 64 KiB, reply 1 MiB, config 1 MiB): no input can make it grow.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define REQ_MAX (64 * 1024)       /* gpuperf/daemon/protocol.py MAX_BYTES */
#define REPLY_MAX (1024 * 1024)
#define CONFIG_MAX (1024 * 1024)
#define ENV_MAX 256               /* protocol.MAX_ENV */
#define ENV_VALUE_MAX 8192        /* protocol.MAX_ENV_VALUE */
#define NCCL_DIRS_MAX 64
#define NCCL_NAMES_MAX 32
#define WHY_MAX 400
#define JSON_DEPTH_MAX 64

/* gpuperf.prolog.fast.ENV_PREFIXES / ENV_NAMES: what the prolog's steps read */
static const char *const HOOK_PREFIXES[] = {"SLURM_", "SLURMD_", "SPANK_", "_SLURM_SPANK_OPTION_", "GPUPERF", NULL};
static const char *const HOOK_NAMES[] = {"CUDA_VISIBLE_DEVICES", NULL};
/* gpuperf.env.plan.VARIABLE_CLASSES, and what the TaskProlog reads to find the job's NCCL */
static const char *const TASK_PREFIXES[] = {"NCCL_", "CUDA_", "PYTORCH_", "TORCH_", "OMP_", "UCX_", "FI_",
					    "NVSHMEM_", "GLOO_", "MKL_", NULL};
static const char *const TASK_NAMES[] = {"LD_LIBRARY_PATH", "CONDA_PREFIX", "VIRTUAL_ENV", "NCCL_VERSION", NULL};

enum mode { PROLOG, EPILOG, TASKPROLOG };
static const char *const MODE_NAMES[] = {"prolog", "epilog", "taskprolog"};
static enum mode mode;
static char **args;
extern char **environ;

/* ---------------------------------------------------------------- fallback */

static int utf8_valid(const unsigned char *s, size_t n);

static int clip(const char *s, size_t n, size_t max) /* n, or less than max at a character's start */
{
	if (n <= max)
		return (int)n;
	/* a why cut mid-character would put invalid UTF-8 into the Python hook's environment */
	while (max > 0 && ((unsigned char)s[max] & 0xC0) == 0x80)
		max--;
	return (int)max;
}

__attribute__((noreturn, format(printf, 2, 3))) static void fallback(const char *kind, const char *fmt, ...)
{
	static char why[WHY_MAX + 1], var[WHY_MAX + 64], exe[PATH_MAX], dir[PATH_MAX], target[PATH_MAX + 64],
		real[PATH_MAX];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	if (n >= (int)sizeof why)
		why[clip(why, sizeof why, sizeof why - 1)] = '\0';
	snprintf(var, sizeof var, "GPUPERF_HOOK_FALLBACK=%s: %s", kind, why);

	const char *err = NULL;
	ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (len <= 0 || exe[0] != '/') {
		err = len <= 0 ? strerror(errno) : "/proc/self/exe is not a path";
	} else {
		exe[len] = '\0';
		memcpy(dir, exe, (size_t)len + 1);
		*strrchr(dir, '/') = '\0';
		snprintf(target, sizeof target, "%s/../venv/bin/gpuperf-%s", dir, MODE_NAMES[mode]);
		/* a fallback that is this program again (a misinstall) would exec forever */
		if (realpath(target, real) != NULL && strcmp(real, exe) == 0)
			err = "it is gpuperf-hook itself";
	}
	if (err == NULL) {
		size_t nenv = 0, nargs = 0;
		while (environ[nenv] != NULL)
			nenv++;
		while (args[nargs] != NULL)
			nargs++;
		char **env = calloc(nenv + 2, sizeof *env);
		char **argv = calloc(nargs + 1, sizeof *argv);
		if (env == NULL || argv == NULL) {
			err = "out of memory";
		} else {
			size_t j = 0;
			for (size_t i = 0; i < nenv; i++)
				if (strncmp(environ[i], "GPUPERF_HOOK_FALLBACK=", 22) != 0)
					env[j++] = environ[i];
			env[j] = var;
			argv[0] = target;
			for (size_t i = 1; i < nargs; i++)
				argv[i] = args[i];
			execve(target, argv, env);
			err = strerror(errno);
		}
	}
	/* a failing prolog drains the node: gpuperf's own failure must never do that (nor fail a task) */
	fprintf(stderr, "gpuperf: hook fallback failed: %s: %s (%s: %s)\n", target[0] ? target : "venv hook", err, kind,
		why);
	exit(0);
}

/* ---------------------------------------------------------------- config */

static struct {
	const char *path;
	char key[32];
	char socket_dir[PATH_MAX];
	char user_socket_dir[PATH_MAX];
	double timeout_s;
	int fast_path;
} cfg = {NULL, "", "/run/gpuperf/daemon", "/run/gpuperf/daemon-user", 2.0, 1};

static uint32_t crc32_ieee(const unsigned char *p, size_t n)
{
	static uint32_t table[256];
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
		table[i] = c;
	}
	uint32_t crc = 0xFFFFFFFFu;
	while (n--)
		crc = table[(crc ^ *p++) & 0xFF] ^ (crc >> 8);
	return crc ^ 0xFFFFFFFFu;
}

static char *skip_ws(char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	return s;
}

static int rest_is_blank(char *s) /* what may follow a value or header: whitespace, a comment */
{
	s = skip_ws(s);
	return *s == '\0' || *s == '#';
}

static void trim(char **a, char **b) /* [*a, *b) without surrounding whitespace */
{
	while (*a < *b && (**a == ' ' || **a == '\t'))
		(*a)++;
	while (*b > *a && ((*b)[-1] == ' ' || (*b)[-1] == '\t'))
		(*b)--;
}

static int names_daemon(char *a, char *b) /* a key (dotted or quoted) one of whose parts is "daemon" */
{
	while (a <= b) {
		char *dot = memchr(a, '.', (size_t)(b - a));
		char *pa = a, *pb = dot ? dot : b;
		trim(&pa, &pb);
		while (pa < pb && (*pa == '"' || *pa == '\''))
			pa++;
		while (pb > pa && (pb[-1] == '"' || pb[-1] == '\''))
			pb--;
		if (pb - pa == 6 && memcmp(pa, "daemon", 6) == 0)
			return 1;
		if (dot == NULL)
			break;
		a = dot + 1;
	}
	return 0;
}

static int bare_key(const char *a, const char *b)
{
	if (a == b)
		return 0;
	for (; a < b; a++)
		if (!((*a >= 'a' && *a <= 'z') || (*a >= 'A' && *a <= 'Z') || (*a >= '0' && *a <= '9') || *a == '_' ||
		      *a == '-'))
			return 0;
	return 1;
}

/* TOML's decimal number, without the forms (underscores, leading zeros, inf, hex) we never expect */
static char *toml_number(char *s)
{
	if (*s == '+' || *s == '-')
		s++;
	if (*s == '0' && s[1] >= '0' && s[1] <= '9')
		return NULL;
	char *d = s;
	while (*s >= '0' && *s <= '9')
		s++;
	if (s == d)
		return NULL;
	if (*s == '.') {
		d = ++s;
		while (*s >= '0' && *s <= '9')
			s++;
		if (s == d)
			return NULL;
	}
	if (*s == 'e' || *s == 'E') {
		s++;
		if (*s == '+' || *s == '-')
			s++;
		d = s;
		while (*s >= '0' && *s <= '9')
			s++;
		if (s == d)
			return NULL;
	}
	return s;
}

/* one of our keys' value; 0 when it is not one the C can read exactly as tomllib does */
static int daemon_value(const char *key, char *v)
{
	int is_str = strcmp(key, "socket_dir") == 0 || strcmp(key, "user_socket_dir") == 0;
	if (is_str) {
		if (*v != '"' && *v != '\'')
			return 0;
		char *end = strchr(v + 1, *v);
		if (end == NULL || !rest_is_blank(end + 1))
			return 0;
		size_t n = (size_t)(end - v - 1);
		if (n == 0 || n >= PATH_MAX - 16 || memchr(v + 1, '\\', n) != NULL ||
		    !utf8_valid((unsigned char *)v + 1, n))
			return 0;
		for (size_t i = 1; i <= n; i++)
			if (((unsigned char)v[i] < 0x20 && v[i] != '\t') || v[i] == 0x7f)
				return 0;
		char *dst = strcmp(key, "socket_dir") == 0 ? cfg.socket_dir : cfg.user_socket_dir;
		memcpy(dst, v + 1, n);
		dst[n] = '\0';
		return 1;
	}
	if (strcmp(key, "prolog_fast_path") == 0) {
		if (strncmp(v, "true", 4) == 0 && rest_is_blank(v + 4))
			cfg.fast_path = 1;
		else if (strncmp(v, "false", 5) == 0 && rest_is_blank(v + 5))
			cfg.fast_path = 0;
		else
			return 0;
		return 1;
	}
	/* request_timeout_s: a float; tomllib's integers count too (config._check) */
	char *end = toml_number(v);
	if (end == NULL || !rest_is_blank(end))
		return 0;
	double t = strtod(v, NULL);
	if (!(t > 0) || !isfinite(t))
		return 0;
	cfg.timeout_s = t;
	return 1;
}

/* The [daemon] keys from the config's bytes (NUL-terminated); NULL or why the C cannot read it exactly */
static const char *parse_config(char *text)
{
	static const char *const ours[] = {"socket_dir", "user_socket_dir", "request_timeout_s", "prolog_fast_path"};
	int seen[4] = {0, 0, 0, 0}, in_daemon = 0, daemon_tables = 0;
	if (strstr(text, "\"\"\"") || strstr(text, "'''"))
		return "a multi-line string";
	if ((unsigned char)text[0] == 0xEF)
		return "a byte-order mark";
	for (char *line = text, *next; line != NULL; line = next) {
		next = strchr(line, '\n');
		if (next != NULL)
			*next++ = '\0';
		size_t len = strlen(line);
		if (len > 0 && line[len - 1] == '\r')
			line[len - 1] = '\0';
		char *s = skip_ws(line);
		if (*s == '\0' || *s == '#')
			continue;
		if (*s == '[') {
			int array = s[1] == '[';
			char *a = s + 1 + array, *b = strstr(a, array ? "]]" : "]");
			if (b == NULL || !rest_is_blank(b + 1 + array))
				return "a table header it cannot read";
			trim(&a, &b);
			if (memchr(a, '"', (size_t)(b - a)) || memchr(a, '\'', (size_t)(b - a)))
				return "a quoted table name";
			int daemon = b - a == 6 && memcmp(a, "daemon", 6) == 0;
			if (daemon && array)
				return "[[daemon]]";
			if (daemon && daemon_tables++)
				return "[daemon] twice";
			in_daemon = daemon;
			continue;
		}
		char *eq = strchr(s, '=');
		if (!in_daemon) {
			/* continuation lines of multi-line arrays have no key; a key naming daemon may set ours */
			if (eq != NULL && names_daemon(s, eq))
				return "a dotted key or inline table naming daemon";
			continue;
		}
		if (eq == NULL)
			return "a [daemon] line that is not key = value";
		char *ka = s, *kb = eq;
		trim(&ka, &kb);
		if (!bare_key(ka, kb))
			return "a [daemon] key that is quoted or dotted";
		char *v = skip_ws(eq + 1);
		if (*v == '[' || *v == '{')
			return "a [daemon] array or inline table";
		for (int i = 0; i < 4; i++) {
			if ((size_t)(kb - ka) != strlen(ours[i]) || memcmp(ka, ours[i], (size_t)(kb - ka)) != 0)
				continue;
			if (seen[i]++)
				return "a [daemon] key given twice";
			if (!daemon_value(ours[i], v))
				return "a [daemon] value of another type or form";
		}
	}
	return NULL;
}

static void load_config(void)
{
	static char data[CONFIG_MAX + 2];
	const char *env = getenv("GPUPERF_CONFIG");
	cfg.path = env != NULL && env[0] != '\0' ? env : "/etc/gpuperf/config.toml";
	int fd = open(cfg.path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		fallback("client", "%s: %s", cfg.path, strerror(errno));
	size_t n = 0;
	for (;;) {
		ssize_t r = read(fd, data + n, CONFIG_MAX + 1 - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			fallback("client", "%s: %s", cfg.path, strerror(errno));
		if (r == 0)
			break;
		n += (size_t)r;
		if (n > CONFIG_MAX)
			fallback("client", "%s: over 1 MiB", cfg.path);
	}
	close(fd);
	/* the same identity as gpuperf.files.config's: f"{zlib.crc32(data):08x}-{len(data)}" */
	snprintf(cfg.key, sizeof cfg.key, "%08x-%zu", crc32_ieee((unsigned char *)data, n), n);
	data[n] = '\0';
	if (memchr(data, '\0', n) != NULL)
		fallback("client", "%s: a NUL byte", cfg.path);
	const char *why = parse_config(data);
	if (why != NULL)
		fallback("client", "%s: %s", cfg.path, why);
}

/* ---------------------------------------------------------------- request */

static char req[REQ_MAX + 4]; /* 4: room for the stream socket's length prefix before the body */
static size_t req_len;
static int req_over;

static void put(const char *s, size_t n)
{
	if (req_over || req_len + n > REQ_MAX) {
		req_over = 1;
		return;
	}
	memcpy(req + 4 + req_len, s, n);
	req_len += n;
}

static void puts_raw(const char *s)
{
	put(s, strlen(s));
}

static void put_str(const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	put("\"", 1);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
		if (c == '"' || c == '\\') {
			e[1] = (char)c;
			put(e, 2);
		} else if (c == '\n') {
			put("\\n", 2);
		} else if (c == '\t') {
			put("\\t", 2);
		} else if (c < 0x20) {
			put(e, 6);
		} else {
			put(s + i, 1);
		}
	}
	put("\"", 1);
}

static int utf8_valid(const unsigned char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		unsigned c = s[i], need, min;
		if (c < 0x80) {
			i++;
			continue;
		} else if (c >= 0xC2 && c <= 0xDF) {
			need = 1, min = 0x80;
		} else if (c >= 0xE0 && c <= 0xEF) {
			need = 2, min = 0x800;
		} else if (c >= 0xF0 && c <= 0xF4) {
			need = 3, min = 0x10000;
		} else {
			return 0;
		}
		if (i + need >= n)
			return 0;
		uint32_t cp = c & (0x3F >> need);
		for (unsigned k = 1; k <= need; k++) {
			if ((s[i + k] & 0xC0) != 0x80)
				return 0;
			cp = (cp << 6) | (s[i + k] & 0x3F);
		}
		if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
			return 0;
		i += need + 1;
	}
	return 1;
}

static int listed(const char *name, size_t n, const char *const *prefixes, const char *const *names)
{
	for (; *prefixes != NULL; prefixes++)
		if (n >= strlen(*prefixes) && strncmp(name, *prefixes, strlen(*prefixes)) == 0)
			return 1;
	for (; *names != NULL; names++)
		if (n == strlen(*names) && strncmp(name, *names, n) == 0)
			return 1;
	return 0;
}

static void put_env(void)
{
	int count = 0;
	puts_raw("{");
	for (char **e = environ; *e != NULL; e++) {
		const char *eq = strchr(*e, '=');
		if (eq == NULL)
			continue;
		size_t n = (size_t)(eq - *e), vn = strlen(eq + 1);
		if (!listed(*e, n, HOOK_PREFIXES, HOOK_NAMES) &&
		    !(mode == TASKPROLOG && listed(*e, n, TASK_PREFIXES, TASK_NAMES)))
			continue;
		if (!utf8_valid((const unsigned char *)*e, n + 1 + vn))
			fallback("client", "non-UTF-8 environment (%.*s)", (int)(n < 64 ? n : 64), *e);
		if (vn > ENV_VALUE_MAX)
			fallback("client", "%.*s is over %d bytes", (int)(n < 64 ? n : 64), *e, ENV_VALUE_MAX);
		if (++count > ENV_MAX)
			fallback("client", "over %d environment variables to send", ENV_MAX);
		if (count > 1)
			puts_raw(",");
		put_str(*e, n);
		puts_raw(":");
		put_str(eq + 1, vn);
	}
	puts_raw("}");
}

/* the libnccl.so.* names in one directory of the task's LD_LIBRARY_PATH or conda env (gpuperf.env.ncclver) */
static void put_nccl_dir(const char *dir, size_t n, int *ndirs, char seen[][PATH_MAX])
{
	char path[PATH_MAX];
	if (n == 0 || n >= PATH_MAX || *ndirs >= NCCL_DIRS_MAX)
		return;
	memcpy(path, dir, n);
	path[n] = '\0';
	for (int i = 0; i < *ndirs; i++)
		if (strcmp(seen[i], path) == 0)
			return; /* one JSON member per directory */
	DIR *d = opendir(path);
	if (d == NULL)
		return;
	strcpy(seen[*ndirs], path);
	if ((*ndirs)++)
		puts_raw(",");
	put_str(path, n);
	puts_raw(":[");
	int names = 0;
	for (struct dirent *de; names < NCCL_NAMES_MAX && (de = readdir(d)) != NULL;) {
		size_t len = strlen(de->d_name);
		if (strncmp(de->d_name, "libnccl.so.", 11) != 0 || !utf8_valid((unsigned char *)de->d_name, len))
			continue;
		if (names++)
			puts_raw(",");
		put_str(de->d_name, len);
	}
	closedir(d);
	puts_raw("]");
}

static void put_nccl_wheels(const char *venv)
{
	char lib[PATH_MAX], sp[PATH_MAX];
	int names = 0;
	if (venv == NULL || venv[0] == '\0' || snprintf(lib, sizeof lib, "%s/lib", venv) >= (int)sizeof lib)
		return;
	DIR *d = opendir(lib);
	if (d == NULL)
		return;
	for (struct dirent *py; (py = readdir(d)) != NULL;) {
		if (strncmp(py->d_name, "python3", 7) != 0 ||
		    snprintf(sp, sizeof sp, "%s/%s/site-packages", lib, py->d_name) >= (int)sizeof sp)
			continue;
		DIR *s = opendir(sp);
		if (s == NULL)
			continue;
		for (struct dirent *de; names < NCCL_NAMES_MAX && (de = readdir(s)) != NULL;) {
			size_t len = strlen(de->d_name);
			if (len < 24 || strncmp(de->d_name, "nvidia_nccl_cu", 14) != 0 ||
			    strcmp(de->d_name + len - 10, ".dist-info") != 0 ||
			    !utf8_valid((unsigned char *)de->d_name, len))
				continue;
			if (names++)
				puts_raw(",");
			put_str(de->d_name, len);
		}
		closedir(s);
	}
	closedir(d);
}

static void build_request(void)
{
	puts_raw(mode == PROLOG ? "{\"v\":1,\"op\":\"prolog\",\"job\":{\"env\":"
				: mode == EPILOG ? "{\"v\":1,\"op\":\"epilog\",\"job\":{\"env\":"
						 : "{\"v\":1,\"op\":\"taskenv\",\"job\":{\"env\":");
	put_env();
	puts_raw(",\"config\":{\"source\":");
	put_str(cfg.path, strlen(cfg.path));
	puts_raw(",\"file\":");
	put_str(cfg.key, strlen(cfg.key));
	puts_raw("}");
	if (mode == TASKPROLOG) {
		char num[32];
		snprintf(num, sizeof num, ",\"pid\":%d", (int)getpid());
		puts_raw(num);
		for (int size = 1024; size <= 65536; size *= 4) {
			cpu_set_t *set = CPU_ALLOC(size);
			if (set == NULL)
				break;
			size_t bytes = CPU_ALLOC_SIZE(size);
			int ok = sched_getaffinity(0, bytes, set) == 0, err = errno;
			if (ok) {
				snprintf(num, sizeof num, ",\"cpus\":%d", CPU_COUNT_S(bytes, set));
				puts_raw(num);
			}
			CPU_FREE(set);
			if (ok || err != EINVAL)
				break;
		}
		static char seen[NCCL_DIRS_MAX][PATH_MAX];
		int ndirs = 0;
		puts_raw(",\"nccl\":{\"dirs\":{");
		const char *ld = getenv("LD_LIBRARY_PATH"), *conda = getenv("CONDA_PREFIX");
		for (const char *p = ld; p != NULL && *p != '\0';) {
			const char *colon = strchr(p, ':');
			size_t n = colon ? (size_t)(colon - p) : strlen(p);
			put_nccl_dir(p, n, &ndirs, seen);
			p = colon ? colon + 1 : NULL;
		}
		if (conda != NULL && conda[0] != '\0') {
			char dir[PATH_MAX];
			size_t cn = strlen(conda); /* os.path.join(CONDA_PREFIX, "lib") */
			int n = snprintf(dir, sizeof dir, "%s%slib", conda, conda[cn - 1] == '/' ? "" : "/");
			if (n < (int)sizeof dir)
				put_nccl_dir(dir, (size_t)n, &ndirs, seen);
		}
		puts_raw("},\"wheels\":[");
		put_nccl_wheels(getenv("VIRTUAL_ENV"));
		puts_raw("]}");
	}
	puts_raw("}}");
	if (req_over)
		fallback("client", "request over %d bytes", REQ_MAX);
}

/* ---------------------------------------------------------------- exchange */

static char reply[REPLY_MAX + 1];
static size_t reply_len;
static double deadline;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int arm(int fd) /* the time left for the whole exchange, on the next blocking call */
{
	double left = deadline - now_s();
	if (left < 1e-4) {
		errno = ETIMEDOUT;
		return -1;
	}
	struct timeval tv = {(time_t)left, (suseconds_t)((left - (double)(time_t)left) * 1e6)};
	if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) || setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv))
		return -1;
	return 0;
}

static const char *errtext(int e)
{
	return e == EAGAIN || e == EWOULDBLOCK || e == ETIMEDOUT ? "timed out" : strerror(e);
}

static int io_all(int fd, char *buf, size_t n, int sending) /* 1: all n bytes; 0: closed; -1: errno */
{
	for (size_t done = 0; done < n;) {
		if (arm(fd))
			return -1;
		ssize_t r = sending ? send(fd, buf + done, n - done, MSG_NOSIGNAL) : recv(fd, buf + done, n - done, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return (int)r;
		done += (size_t)r;
	}
	return 1;
}

static void exchange(void)
{
	const char *dir = mode == TASKPROLOG ? cfg.user_socket_dir : cfg.socket_dir;
	const char *name = mode == TASKPROLOG ? "user.sock" : "hook.sock";
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	size_t dn = strlen(dir);
	int n = snprintf(sa.sun_path, sizeof sa.sun_path, "%s%s%s", dir, dir[dn - 1] == '/' ? "" : "/", name);
	if (n >= (int)sizeof sa.sun_path)
		fallback("client", "%s/%s: path too long for a Unix socket", dir, name);
	const char *path = sa.sun_path;
	int fd = socket(AF_UNIX, (mode == TASKPROLOG ? SOCK_STREAM : SOCK_SEQPACKET) | SOCK_CLOEXEC, 0);
	if (fd < 0)
		fallback("down", "%s: %s", path, strerror(errno));
	deadline = now_s() + cfg.timeout_s;
	int r;
	do
		r = arm(fd) ? -1 : connect(fd, (struct sockaddr *)&sa, sizeof sa);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		fallback("down", "%s: %s", path, errtext(errno));
	if (mode != TASKPROLOG) {
		/* SEQPACKET keeps the message's boundaries: one send, one recv, no framing */
		if (io_all(fd, req + 4, req_len, 1) < 0)
			fallback("down", "%s: %s", path, errtext(errno));
		ssize_t got;
		do
			got = arm(fd) ? -1 : recv(fd, reply, sizeof reply, MSG_TRUNC);
		while (got < 0 && errno == EINTR);
		if (got < 0)
			fallback("down", "%s: %s", path, errtext(errno));
		if (got == 0)
			fallback("down", "%s: the daemon closed the connection without a reply", path);
		if ((size_t)got > REPLY_MAX)
			fallback("down", "%s: reply over 1 MiB", path);
		reply_len = (size_t)got;
	} else {
		uint32_t len = (uint32_t)req_len;
		unsigned char *h = (unsigned char *)req;
		h[0] = (unsigned char)(len >> 24), h[1] = (unsigned char)(len >> 16), h[2] = (unsigned char)(len >> 8),
		h[3] = (unsigned char)len;
		if (io_all(fd, req, req_len + 4, 1) < 0)
			fallback("down", "%s: %s", path, errtext(errno));
		unsigned char hdr[4];
		int got = io_all(fd, (char *)hdr, 4, 0);
		if (got == 0)
			fallback("down", "%s: the daemon closed the connection without a reply", path);
		if (got < 0)
			fallback("down", "%s: %s", path, errtext(errno));
		len = (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 | (uint32_t)hdr[2] << 8 | hdr[3];
		if (len > REPLY_MAX)
			fallback("down", "%s: reply over 1 MiB", path);
		got = io_all(fd, reply, len, 0);
		if (got == 0)
			fallback("down", "%s: the daemon closed the connection before the whole reply", path);
		if (got < 0)
			fallback("down", "%s: %s", path, errtext(errno));
		reply_len = len;
	}
	close(fd);
}

/* ---------------------------------------------------------------- reply */

enum jtype { J_ABSENT, J_STR, J_INT, J_NUM, J_TRUE, J_FALSE, J_NULL, J_OTHER };
struct jval {
	enum jtype t;
	char *s;
	size_t n;
	long long i;
};
static const char *const MEMBERS[] = {"v",   "ok",     "done",        "exit_code",          "why",
				     "error", "out", "record_path", "record", "hook_record_path", "hook_record"};
enum { M_V, M_OK, M_DONE, M_EXIT, M_WHY, M_ERROR, M_OUT, M_RECPATH, M_RECORD, M_HOOKPATH, M_HOOKREC, M_COUNT };
static struct jval got[M_COUNT];
static char *jp, *jend;

static void jws(void)
{
	while (jp < jend && (*jp == ' ' || *jp == '\t' || *jp == '\n' || *jp == '\r'))
		jp++;
}

static void put_utf8(char **w, uint32_t cp)
{
	unsigned char *o = (unsigned char *)*w;
	if (cp < 0x80) {
		*o++ = (unsigned char)cp;
	} else if (cp < 0x800) {
		*o++ = (unsigned char)(0xC0 | cp >> 6), *o++ = (unsigned char)(0x80 | (cp & 0x3F));
	} else if (cp < 0x10000) {
		*o++ = (unsigned char)(0xE0 | cp >> 12), *o++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
		*o++ = (unsigned char)(0x80 | (cp & 0x3F));
	} else {
		*o++ = (unsigned char)(0xF0 | cp >> 18), *o++ = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
		*o++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3F)), *o++ = (unsigned char)(0x80 | (cp & 0x3F));
	}
	*w = (char *)o;
}

static int hex4(uint32_t *out)
{
	uint32_t v = 0;
	if (jend - jp < 4)
		return 0;
	for (int k = 0; k < 4; k++, jp++) {
		char c = *jp;
		v = v << 4 | (uint32_t)(c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
					   : c >= 'A' && c <= 'F' ? c - 'A' + 10 : 99);
		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))
			return 0;
	}
	*out = v;
	return 1;
}

/* a string at jp, decoded in place (never longer than its escaped form); 0 when malformed */
static int jstring(char **s, size_t *n)
{
	if (jp >= jend || *jp != '"')
		return 0;
	char *w = ++jp, *start = jp;
	while (jp < jend && *jp != '"') {
		unsigned char c = (unsigned char)*jp;
		if (c < 0x20)
			return 0;
		if (c != '\\') {
			*w++ = *jp++;
			continue;
		}
		if (++jp >= jend)
			return 0;
		char e = *jp++;
		const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t", *hit = strchr(from, e);
		if (e != 'u') {
			if (e == '\0' || hit == NULL)
				return 0;
			*w++ = to[hit - from];
			continue;
		}
		uint32_t cp, lo;
		if (!hex4(&cp))
			return 0;
		if (cp >= 0xDC00 && cp <= 0xDFFF)
			return 0; /* a lone low surrogate has no UTF-8 form */
		if (cp >= 0xD800 && cp <= 0xDBFF) {
			if (jend - jp < 6 || jp[0] != '\\' || jp[1] != 'u')
				return 0;
			jp += 2;
			if (!hex4(&lo) || lo < 0xDC00 || lo > 0xDFFF)
				return 0;
			cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
		}
		put_utf8(&w, cp);
	}
	if (jp >= jend)
		return 0;
	jp++;
	*s = start, *n = (size_t)(w - start);
	return utf8_valid((unsigned char *)start, *n);
}

static int jliteral(const char *word)
{
	size_t n = strlen(word);
	if ((size_t)(jend - jp) < n || memcmp(jp, word, n) != 0)
		return 0;
	jp += n;
	return 1;
}

static int jvalue(struct jval *v, int depth);

static int jnumber(struct jval *v)
{
	char *s = jp;
	int integral = 1;
	if (jp < jend && *jp == '-')
		jp++;
	if (jp < jend && *jp == '0')
		jp++;
	else if (jp < jend && *jp >= '1' && *jp <= '9')
		while (jp < jend && *jp >= '0' && *jp <= '9')
			jp++;
	else
		return 0;
	if (jp < jend && *jp == '.') {
		integral = 0;
		char *d = ++jp;
		while (jp < jend && *jp >= '0' && *jp <= '9')
			jp++;
		if (jp == d)
			return 0;
	}
	if (jp < jend && (*jp == 'e' || *jp == 'E')) {
		integral = 0;
		jp++;
		if (jp < jend && (*jp == '+' || *jp == '-'))
			jp++;
		char *d = jp;
		while (jp < jend && *jp >= '0' && *jp <= '9')
			jp++;
		if (jp == d)
			return 0;
	}
	v->t = J_NUM;
	if (integral && jp - s < 19) { /* fits a long long: read it */
		char tmp[24];
		memcpy(tmp, s, (size_t)(jp - s));
		tmp[jp - s] = '\0';
		v->t = J_INT, v->i = strtoll(tmp, NULL, 10);
	}
	return 1;
}

/* an object or, when top is set, the reply itself: our members kept in got[], others skipped */
static int jcontainer(int depth, int top)
{
	char close = *jp == '{' ? '}' : ']';
	int object = close == '}';
	struct jval skip;
	jp++;
	jws();
	if (jp < jend && *jp == close) {
		jp++;
		return 1;
	}
	for (;;) {
		struct jval *into = &skip;
		if (object) {
			char *k;
			size_t kn;
			if (!jstring(&k, &kn))
				return 0;
			for (int m = 0; top && m < M_COUNT; m++)
				if (kn == strlen(MEMBERS[m]) && memcmp(k, MEMBERS[m], kn) == 0)
					into = &got[m]; /* a member given twice: the last wins, as with Python's json */
			jws();
			if (jp >= jend || *jp++ != ':')
				return 0;
			jws();
		}
		if (!jvalue(into, depth + 1))
			return 0;
		jws();
		if (jp < jend && *jp == ',') {
			jp++;
			jws();
			continue;
		}
		if (jp < jend && *jp == close) {
			jp++;
			return 1;
		}
		return 0;
	}
}

static int jvalue(struct jval *v, int depth)
{
	memset(v, 0, sizeof *v);
	if (jp >= jend || depth > JSON_DEPTH_MAX)
		return 0;
	switch (*jp) {
	case '"':
		v->t = J_STR;
		return jstring(&v->s, &v->n);
	case '{':
	case '[':
		v->t = J_OTHER;
		return jcontainer(depth, 0);
	case 't':
		v->t = J_TRUE;
		return jliteral("true");
	case 'f':
		v->t = J_FALSE;
		return jliteral("false");
	case 'n':
		v->t = J_NULL;
		return jliteral("null");
	default:
		return jnumber(v);
	}
}

static int parse_reply(void)
{
	jp = reply, jend = reply + reply_len;
	jws();
	if (jp >= jend || *jp != '{' || !jcontainer(0, 1))
		return 0;
	jws();
	return jp == jend;
}

/* ---------------------------------------------------------------- main */

static void write_all(int fd, const char *s, size_t n)
{
	while (n > 0) {
		ssize_t r = write(fd, s, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return;
		s += r, n -= (size_t)r;
	}
}

static void write_record(int path_member, int text_member)
{
	struct jval *p = &got[path_member], *r = &got[text_member];
	if (p->t != J_STR || p->n == 0 || p->s[0] != '/' || memchr(p->s, '\0', p->n) != NULL || p->n >= PATH_MAX)
		return;
	char path[PATH_MAX];
	memcpy(path, p->s, p->n);
	path[p->n] = '\0';
	/* each record once: an existing file (another task of the step, a planted link) is left alone */
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	if (r->t == J_STR)
		write_all(fd, r->s, r->n);
	close(fd);
}

int main(int argc, char **argv)
{
	(void)argc;
	args = argv;
	const char *base = argv[0] ? strrchr(argv[0], '/') : NULL;
	base = base ? base + 1 : argv[0] ? argv[0] : "";
	if (strcmp(base, "gpuperf-prolog") == 0)
		mode = PROLOG;
	else if (strcmp(base, "gpuperf-epilog") == 0)
		mode = EPILOG;
	else if (strcmp(base, "gpuperf-taskprolog") == 0)
		mode = TASKPROLOG;
	else {
		fprintf(stderr, "usage: run as gpuperf-prolog, gpuperf-epilog or gpuperf-taskprolog (a link to gpuperf-hook), "
				"as Slurm's Prolog, Epilog or TaskProlog\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	load_config();
	if (mode == PROLOG && !cfg.fast_path)
		fallback("client", "daemon.prolog_fast_path = false");
	build_request();
	exchange();
	if (!parse_reply())
		fallback("down", "reply is not JSON");
	if (got[M_V].t != J_INT || got[M_V].i != 1)
		fallback("down", "reply of an unknown protocol version");
	struct jval *e = &got[M_ERROR], *w = &got[M_WHY];
	if (got[M_OK].t != J_TRUE)
		fallback("declined", "daemon refused: %.*s", e->t == J_STR ? clip(e->s, e->n, 300) : 9,
			 e->t == J_STR ? e->s : "no reason");
	if (got[M_DONE].t != J_TRUE)
		fallback("declined", "%.*s", w->t == J_STR ? clip(w->s, w->n, 300) : 15,
			 w->t == J_STR ? w->s : "daemon declined");
	if (mode == TASKPROLOG) {
		if (got[M_OUT].t != J_STR)
			fallback("down", "reply without out");
		write_all(1, got[M_OUT].s, got[M_OUT].n);
		write_record(M_RECPATH, M_RECORD);  /* the step's exports, for the report */
		write_record(M_HOOKPATH, M_HOOKREC); /* this task's hook record (tasks/taskprolog.<pid>.json) */
		return 0;
	}
	if (mode == EPILOG)
		return 0;
	/* as gpuperf.prolog.fast: a done reply without an integer exit code is success */
	return got[M_EXIT].t == J_INT ? (int)(got[M_EXIT].i & 0xFF) : 0;
}
