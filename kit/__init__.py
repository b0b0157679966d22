"""timecat-kit: the logic behind the notebooks, in layers (kit.core at the bottom, kit.cli on
top); `.importlinter` lists them and the test suite checks that every import points down."""
