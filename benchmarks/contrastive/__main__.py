from benchmarks.contrastive.run import main

main()
