-- Which machine, and which boot of it, registered each node, so that a
-- second box sending the same node ID (two agents given one --node-id, two
-- boxes cloned from one image) is refused while the first is live instead
-- of silently becoming the same node. instance_id is the cloud's instance
-- ID or a hash of the host name and machine-id; boot_id is the kernel's boot
-- ID. '' is unknown: nodes registered before this migration, and older
-- agents, are not compared. Version 3 is the sessions migration; the two
-- are independent, and each is applied when missing.
ALTER TABLE nodes ADD COLUMN instance_id TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN boot_id TEXT NOT NULL DEFAULT '';
