from accelkit.cli.app import main

if __name__ == "__main__":  # a spawn pool re-imports the main module: run only as a script
    main()
