"""oxtree's version, in optree's module layout."""

__version__ = "0.1.0"
__license__ = "Apache-2.0"
__author__ = "oxtree contributors"
__release__ = True
