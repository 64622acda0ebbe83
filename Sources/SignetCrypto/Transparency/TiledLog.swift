import SignetCore

/// A log of `size` entries read through its published tiles (c2sp.org/tlog-tiles): the hashes
/// a proof needs, each tile fetched once. A tile that is not exactly its width's bytes is
/// refused; a partial tile the log no longer serves (it became full) is read from the full one.
/// Nothing read is trusted: a proof built from tiles holds only if it verifies against signed
/// checkpoints.
public struct TiledLog {
    public let size: Int
    /// The tile at a path below the log's prefix (`tile/0/x001/234.p/7`), nil when absent.
    private let fetch: (String) throws -> [UInt8]?
    private var tiles: [String: [UInt8]] = [:]

    public init(size: Int, fetch: @escaping (String) throws -> [UInt8]?) {
        self.size = size
        self.fetch = fetch
    }

    /// Tiles fetched so far.
    public var fetched: Int { tiles.count }

    /// The consistency proof from the first `old` entries to all `size` (RFC 9162 §2.1.4.1).
    public mutating func consistencyProof(old: Int) throws -> [[UInt8]] {
        guard old >= 0, old <= size else { throw SignetError(.usage, "a consistency proof from \(old) entries to \(size)") }
        return try TileTree.consistencyProof(old: old, new: size) { try self.subtree($0, $1) }
    }

    /// The inclusion proof of entry `index` (RFC 9162 §2.1.3.1).
    public mutating func inclusionProof(index: Int) throws -> [[UInt8]] {
        guard index >= 0, index < size else { throw SignetError(.usage, "entry \(index) of a log of \(size)") }
        return try TileTree.inclusionProof(index: index, size: size) { try self.subtree($0, $1) }
    }

    /// The root hash of the log's `size` entries, from its tiles.
    public mutating func rootHash() throws -> [UInt8] {
        guard size > 0 else { return TileTree.sha256([]) }
        return try subtree(0, size)
    }

    mutating func subtree(_ lo: Int, _ hi: Int) throws -> [UInt8] {
        let count = hi - lo
        if count & (count - 1) == 0 { return try node(level: count.trailingZeroBitCount, index: lo >> count.trailingZeroBitCount) }
        let split = TileTree.largestPowerOfTwo(below: count)
        return TileTree.nodeHash(try subtree(lo, lo + split), try subtree(lo + split, hi))
    }

    /// The hash of the complete subtree at tree level `level`, `index`: read from the tile that
    /// holds level 8·⌊level/8⌋ and combined up the rest.
    mutating func node(level: Int, index: Int) throws -> [UInt8] {
        let tileLevel = level / TileTree.height
        let below = level % TileTree.height
        let first = index << below
        let nodes = size >> (tileLevel * TileTree.height)
        let tileIndex = first / TileTree.width
        let width = min(TileTree.width, nodes - tileIndex * TileTree.width)
        guard width > 0, first + (1 << below) <= nodes else {
            throw SignetError(.malformedInput, "a log of \(size) entries has no node \(index) at level \(level)")
        }
        let tile = try self.tile(level: tileLevel, index: tileIndex, width: width)
        var hashes = (0..<(1 << below)).map { offset -> [UInt8] in
            let start = (first % TileTree.width + offset) * 32
            return Array(tile[start..<(start + 32)])
        }
        while hashes.count > 1 { hashes = stride(from: 0, to: hashes.count, by: 2).map { TileTree.nodeHash(hashes[$0], hashes[$0 + 1]) } }
        return hashes[0]
    }

    mutating func tile(level: Int, index: Int, width: Int) throws -> [UInt8] {
        let path = TileTree.path(level: level, index: index, width: width)
        if let tile = tiles[path] { return tile }
        var bytes = try fetch(path)
        if bytes == nil, width < TileTree.width, let full = try fetch(TileTree.path(level: level, index: index)) {
            // The log replaced the partial tile with the full one: its first W hashes.
            guard full.count == TileTree.width * 32 else { throw Self.wrongWidth(TileTree.path(level: level, index: index), full.count, TileTree.width) }
            bytes = Array(full[..<(width * 32)])
        }
        guard let bytes else { throw SignetError(.fileNotFound, "the log serves no tile \(path)", path: path) }
        guard bytes.count == width * 32 else { throw Self.wrongWidth(path, bytes.count, width) }
        tiles[path] = bytes
        return bytes
    }

    static func wrongWidth(_ path: String, _ count: Int, _ width: Int) -> SignetError {
        SignetError(.malformedInput, "the log's tile \(path) is \(count) bytes, not \(width) hashes of 32 (c2sp.org/tlog-tiles)", path: path)
    }
}
