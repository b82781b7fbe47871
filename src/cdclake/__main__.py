from cdclake.cli.main import main

main()
