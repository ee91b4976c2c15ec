from benchmarks.ingest.run import main

main()
