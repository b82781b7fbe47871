from cdclake.cli import main

main()
