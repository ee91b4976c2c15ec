from benchmarks.judges.run import main

main()
