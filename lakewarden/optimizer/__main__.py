"""An optimizer as a Spark application of its own: what `spark-submit` runs (`python -m lakewarden.optimizer`
works too). Its arguments are `lakewarden optimizer`'s; the master is the one submitted to.

    spark-submit --master spark://host:7077 $(lakewarden setup-spark --submit-args) \\
        --server http://lakewarden:1630 --group etl --parallelism 4
"""

from lakewarden.cli.main import app

if __name__ == "__main__":
    app(["optimizer", *__import__("sys").argv[1:]], prog_name="lakewarden optimizer")
