"""Config presets: each module exposes get_config()."""
