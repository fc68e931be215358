"""Codecs and files, the bottom layer: safe reads of user-writable files (``safeio``), gpuperf's
own state and job files (``statefiles``, ``jobstate``, ``jobdirs``), JSON and TOML codecs
(``jsonlite`` for the hooks, ``jsoncodec`` for the services, ``tomlw``), logging (``log``) and the
site configuration file (``config``). Imports nothing else from gpuperf."""
