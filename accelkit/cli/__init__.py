"""Command line (typer + rich). The library never imports this package."""
