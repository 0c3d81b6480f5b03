"""`python -m pasodoble` is the `pasodoble` command."""

from pasodoble.cli import run

if __name__ == "__main__":
    run()
