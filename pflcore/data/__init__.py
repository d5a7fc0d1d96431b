"""Where data comes from (sources), how it is split (partition), how it is shifted
(shifts) and how clients see it (federated)."""
