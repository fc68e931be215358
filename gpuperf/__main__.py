from gpuperf.cli import main

raise SystemExit(main())
