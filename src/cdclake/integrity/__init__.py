"""Integrity checks on decoded change events: today the TiCDC row checksum (:mod:`.ticdc_checksum`)."""
