"""Renderers: turn computed results into output; none of them computes anything."""
