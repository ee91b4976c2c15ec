from benchmarks.clustering.run import main

raise SystemExit(main())
