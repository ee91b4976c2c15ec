from benchmarks.model_mode.run import main

main()
