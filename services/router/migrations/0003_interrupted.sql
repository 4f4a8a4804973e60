-- A turn still running when the router's shutdown grace ran out: its stream ended with
-- UNAVAILABLE and its decision is recorded with the answer it had so far, marked here.

ALTER TABLE routing_decisions ADD COLUMN interrupted boolean NOT NULL DEFAULT false;
