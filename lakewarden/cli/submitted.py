"""An optimizer as a Spark application of its own: the program `spark-submit` runs. Its arguments are
`lakewarden optimizer`'s; the master is the one submitted to.

    spark-submit --master spark://host:7077 $(lakewarden setup-spark --submit-args) \\
        --server http://lakewarden:1630 --group etl --parallelism 4
"""

import sys

from lakewarden.cli.main import app

if __name__ == "__main__":
    app(["optimizer", *sys.argv[1:]], prog_name="lakewarden optimizer")
