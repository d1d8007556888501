"""The agent's SSH surface: who may connect, the lanpool channel's session (and its log bursts on a direct connection), host and authorized keys, pairing codes, the mDNS advert."""
