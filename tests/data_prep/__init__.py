"""Tests of :mod:`data_prep`: readers, parsers and the build of data sets."""
