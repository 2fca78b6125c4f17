"""Naive per-node references of the papers' equations (Tai, Teng, Tran) the cells are held to."""
