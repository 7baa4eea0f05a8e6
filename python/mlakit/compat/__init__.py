"""Drop-in modules with other libraries' conventions (each converts at its boundary and says how)."""
