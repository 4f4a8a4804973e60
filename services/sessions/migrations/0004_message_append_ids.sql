-- The caller's id for the batch each message came in (AppendMessagesRequest.append_id), so a
-- live session rebuilt from the record still recognises a retried batch. NULL when none was
-- given; adding a nullable column without a default rewrites no partition.
ALTER TABLE session_messages ADD COLUMN append_id TEXT;
