"""Choosing a map's settings from data: landmarks (:mod:`.landmarks`, :mod:`.greedy`)
and the kernel bandwidth (:mod:`.heuristic`; :mod:`.gamma`, scikit-learn loaded on use)."""
