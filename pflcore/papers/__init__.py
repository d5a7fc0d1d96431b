"""The papers, one module each: ``pflcore/papers/<paper>.py`` holds the paper's
experimental settings as configs and the numbers it reports, so notebooks, tables and
scripts share one source.

Now: :mod:`pflcore.papers.fedpac` (FedPAC, Xu, Tong, Huang, ICLR 2023) and
:mod:`pflcore.papers.fedcp` (FedCP, Zhang et al., KDD 2023).
"""
