"""The one job the whole-process runs of ``benchmarks/whole/run.sh`` drain."""
from jobpool import job


@job(name="ab.noop")
def noop(n):
    return None
