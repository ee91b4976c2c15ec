from benchmarks.ui.run import main

main()
