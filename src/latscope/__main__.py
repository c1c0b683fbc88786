from latscope.cli.main import main

raise SystemExit(main())
