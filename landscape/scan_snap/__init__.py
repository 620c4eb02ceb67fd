"""Scan and Snap (Tian et al., 2023): 1-layer transformer dynamics, Y/Z reparameterisation."""
