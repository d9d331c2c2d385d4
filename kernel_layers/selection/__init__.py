"""Choosing a map's settings from data: landmarks (:mod:`.landmarks`) and the kernel
bandwidth (:mod:`.gamma`, scikit-learn loaded on use)."""
