"""The ``gpuperf`` subcommands, one module each (``gpuperf.cli`` imports the one named on the command
line): each parses its arguments, asks the layers below (job records, the daemon's client, checks,
topology, env policy) and prints; none holds logic another front end would need (that goes below,
e.g. ``gpuperf.jobrecords``). ``daemon`` composes the node daemon with the prolog's steps."""
