"""The agent's SSH surface: who may connect, the lanpool channel's session, host and authorized keys, pairing codes, the mDNS advert."""
