"""TPU prices: the sourced price table (USD per chip-hour) and what a stack's pools cost.

Pure Python; imports no Pulumi. ``catalogue`` holds the rows as read from their public source, ``table`` turns
them into (generation, region, price basis) -> USD per chip-hour and says "unpriced" for everything else.
"""
