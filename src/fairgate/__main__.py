from fairgate.cli import main

main()
