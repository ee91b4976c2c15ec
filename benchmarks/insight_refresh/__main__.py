from benchmarks.insight_refresh.run import main

main()
