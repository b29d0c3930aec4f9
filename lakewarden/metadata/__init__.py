"""metadata layer of lakewarden (see DESIGN.md)."""
