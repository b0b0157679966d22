"""The reproducible CPU numerics: an order of operations fixed by the code and the shapes.

The mode and what of it is in effect (numerics), the private OpenBLAS of the large
products (openblas), computations cut into blocks that the shapes fix (blocked) over the
threads lent to them (threads), correctly rounded square roots (rounding), this CPU's model
and flags, read in this one place (cpu), and what each recorded CPU model gave (cpu_records).
It may import kit.files alone of the kit (`import kit` loads numerics, before anything loads
torch)."""
