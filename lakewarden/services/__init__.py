"""services layer of lakewarden (see DESIGN.md)."""
