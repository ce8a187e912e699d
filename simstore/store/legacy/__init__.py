"""The table engine of store formats 1 and 2: dupsort permutation and band tables.

Such stores open and answer as they are; ``simstore-cli rebuild`` moves them to the
run tables of the current format.
"""
