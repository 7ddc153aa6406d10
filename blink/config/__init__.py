"""Blink's settings, one module per section of the YAML file.

``settings`` holds the top-level ``Settings`` and ``load_settings`` (flags > env > YAML >
defaults); every other module holds the types of one section, named by what it configures.
Nothing here imports the gateway or the backends: the config layer is read by them, not the
other way round.
"""
