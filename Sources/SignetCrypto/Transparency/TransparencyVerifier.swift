import SignetCore

/// A device's check of a release's log proof (FORMAT.md §10): the proof holds under the policy
/// for the release's leaf, and its checkpoint is not older than the largest this device keeps
/// for the log, nor another tree of that size, and extends it (a consistency proof read from
/// the log's tiles). Then that checkpoint is kept. The update and the install of a package
/// file or URL both check this way; where the bytes come from and where checkpoints are kept
/// are theirs. Every refusal is `.notLogged`.
public struct TransparencyVerifier {
    public let policy: TransparencyPolicy
    /// The largest checkpoint kept for a log origin (its signed note), nil when none is.
    public var storedCheckpoint: (String) throws -> [UInt8]?
    /// Keeps a verified checkpoint note for a log origin.
    public var store: (String, [UInt8]) throws -> Void
    /// A tile of the log at a path below its prefix (`tile/0/001.p/3`), nil when absent.
    public var tile: (String) throws -> [UInt8]?

    public init(
        policy: TransparencyPolicy, storedCheckpoint: @escaping (String) throws -> [UInt8]?, store: @escaping (String, [UInt8]) throws -> Void,
        tile: @escaping (String) throws -> [UInt8]?
    ) {
        (self.policy, self.storedCheckpoint, self.store, self.tile) = (policy, storedCheckpoint, store, tile)
    }

    /// What the check established.
    public struct Outcome: Sendable {
        public let checkpoint: Checkpoint
        public let index: UInt64
        /// Tiles read for the consistency proof.
        public let tilesFetched: Int
    }

    /// Checks `proof` for the entry whose leaf hash is `leaf`; `refuse` words a refusal.
    public func check(_ proof: TransparencyProof, leaf: [UInt8], refuse: (String) -> SignetError) throws -> Outcome {
        let checkpoint: Checkpoint
        let log: NoteVerifierKey
        do {
            (checkpoint, log) = try proof.verify(leaf: leaf, policy: policy)
        } catch let error as SignetError {
            throw refuse(error.reason)
        }
        var tiles = 0
        guard let storedNote = try storedCheckpoint(checkpoint.origin) else {
            try store(checkpoint.origin, proof.checkpoint)
            return Outcome(checkpoint: checkpoint, index: proof.index, tilesFetched: 0)
        }
        let stored: Checkpoint
        do {
            stored = try Checkpoint(text: try SignedNote.open(storedNote, known: [log]).text)
        } catch let error as SignetError {
            // A kept checkpoint the policy's log key no longer opens: this device keeps its
            // view and refuses rather than start again.
            throw refuse("the checkpoint this device keeps for \(checkpoint.origin) does not open with the policy's log key (\(error.reason))")
        }
        if checkpoint.size < stored.size {
            throw refuse("its proof's checkpoint (\(checkpoint.size) entries) is older than the one this device holds (\(stored.size))")
        } else if checkpoint.size == stored.size {
            guard checkpoint.rootHash == stored.rootHash else {
                throw refuse("the log shows two trees of \(stored.size) entries (a fork): its proof's checkpoint is not the one this device holds")
            }
        } else {
            guard checkpoint.size <= UInt64(Int.max) else { throw refuse("the log's size is beyond what this device reads") }
            var tiled = TiledLog(size: Int(checkpoint.size), fetch: tile)
            let consistency: [[UInt8]]
            do {
                consistency = try tiled.consistencyProof(old: Int(stored.size))
            } catch let error as SignetError {
                throw refuse("cannot read the log's tiles to check that its checkpoint extends the one this device holds: \(error.reason)")
            }
            tiles = tiled.fetched
            guard
                TileTree.verifyConsistency(
                    old: Int(stored.size), new: Int(checkpoint.size), oldRoot: stored.rootHash, newRoot: checkpoint.rootHash, proof: consistency)
            else {
                throw refuse(
                    "the log's checkpoint of \(checkpoint.size) entries does not extend the one of \(stored.size) this device holds (the log was rewritten, or its tiles are not its own)"
                )
            }
            try store(checkpoint.origin, proof.checkpoint)
        }
        return Outcome(checkpoint: checkpoint, index: proof.index, tilesFetched: tiles)
    }

    /// `tlog-HASH.checkpoint`, HASH the first 16 hex digits of SHA-256 of the origin: the file a
    /// device keeps a log's largest checkpoint in.
    public static func checkpointFileName(_ origin: String) -> String {
        "tlog-" + TileTree.sha256(Array(origin.utf8)).prefix(8).map { String(format: "%02x", $0) }.joined() + ".checkpoint"
    }
}
