from jobpool.cli import run

run()
