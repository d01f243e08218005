"""The test suite as a package: shared beds and fixtures (``tests.k8s``, ``tests.chart.chartlib``, ...) are imported
by their package name, the same way from every directory and from ``bench/``."""
