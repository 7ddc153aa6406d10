"""``blink bench``: a bounded load generator and report for any OpenAI-compatible endpoint.

``workloads`` make the requests, ``arrivals`` decide when they start (closed loop: fixed
concurrency; open loop: Poisson or gamma arrivals), ``client`` streams one request and
timestamps every token, ``stats`` turns results into percentiles and goodput, ``report``
writes JSON + Markdown (and ``plots`` PNGs), ``runner`` ties them together.
"""
