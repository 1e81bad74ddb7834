from kubescribe.cli import main

main()
