"""The test suite: its folders mirror the package's (tests/cells for gnn_treelstm/cells, ...);
handbuilt.py and tiny_data.py make the small trees and data sets the tests share, scripts.py
imports the checkout's scripts/ for the tests that run them."""
