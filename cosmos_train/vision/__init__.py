"""What config, data and models all read about pixels, one layer below them: the per-media vision settings
and sizing rules (`settings`), each family's pixel layout (`layout`) and what a processor gives the chat
encoder and engines (`processor`: its tokenizer and layout). No torch here."""
