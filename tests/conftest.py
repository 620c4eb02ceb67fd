"""Tests run in float64: landscape and theory checks compare against closed forms.

Library code is dtype-explicit (training casts to its config's dtype), so enabling x64 here does not
change what a float32 training run computes.
"""
import jax

jax.config.update("jax_enable_x64", True)
