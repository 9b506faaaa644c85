"""pplx_nb benchmarks: each ``bench_<area>.py`` compares pplx_nb with the alternatives."""
