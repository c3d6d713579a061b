"""Search: the Whoosh keyword index, the TF-IDF index and the two-stage engine over both."""
