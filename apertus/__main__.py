from apertus.cli import main

main()
