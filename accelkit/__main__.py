from accelkit.cli.app import main

main()
