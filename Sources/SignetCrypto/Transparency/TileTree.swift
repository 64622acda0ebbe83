internal import COpenSSL

/// A Merkle tree of RFC 6962 §2.1 (leaf hash SHA-256(0x00 || entry), node hash SHA-256(0x01 ||
/// left || right)) and its tiles as c2sp.org/tlog-tiles lays them out: tile level L holds the
/// hashes of tree level 8·L, 256 to a full tile, index N the 256·N-th on; a tile not yet full
/// is `.p/W`, its W hashes.
///
/// Built from the leaf hashes it holds; each level's hashes are kept, so that tiles, the root
/// of any size and proofs are read from it.
public struct TileTree: Sendable {
    /// Hashes per full tile, and tree levels per tile level (tile height 8).
    public static let width = 256
    static let height = 8

    /// `levels[k][i]`: the hash of the i-th complete subtree of 2^k leaves.
    private var levels: [[[UInt8]]] = [[]]

    public init() {}

    /// Leaves in the tree.
    public var size: Int { levels[0].count }

    /// The leaf hashes, in order.
    public var leafHashes: [[UInt8]] { levels[0] }

    /// The leaf hash of `entry`.
    public static func leafHash(_ entry: [UInt8]) -> [UInt8] { sha256([0x00] + entry) }

    /// The hash of two children.
    public static func nodeHash(_ left: [UInt8], _ right: [UInt8]) -> [UInt8] { sha256([0x01] + left + right) }

    /// Appends the entry whose leaf hash is `hash`.
    public mutating func append(leafHash hash: [UInt8]) {
        levels[0].append(hash)
        var level = 0
        var index = levels[0].count - 1
        // Each completed pair makes its parent.
        while index % 2 == 1 {
            let parent = Self.nodeHash(levels[level][index - 1], levels[level][index])
            level += 1
            if levels.count == level { levels.append([]) }
            levels[level].append(parent)
            index /= 2
        }
    }

    /// The root hash of the tree's first `size` leaves (RFC 6962 MTH; SHA-256 of nothing for 0).
    public func rootHash(size: Int? = nil) -> [UInt8] {
        let n = size ?? self.size
        precondition(n >= 0 && n <= self.size)
        guard n > 0 else { return Self.sha256([]) }
        return subtree(0, n)
    }

    /// MTH of leaves lo..<hi.
    func subtree(_ lo: Int, _ hi: Int) -> [UInt8] {
        let count = hi - lo
        if count & (count - 1) == 0 {
            let k = count.trailingZeroBitCount
            return levels[k][lo >> k]
        }
        let split = Self.largestPowerOfTwo(below: count)
        return Self.nodeHash(subtree(lo, lo + split), subtree(lo + split, hi))
    }

    /// The tiles of a tree of `size` leaves: every full tile and each level's partial one, as
    /// (path below the log's prefix, the concatenated hashes).
    public func tiles(size: Int? = nil) -> [(path: String, data: [UInt8])] {
        let n = size ?? self.size
        var tiles: [(String, [UInt8])] = []
        var level = 0
        while true {
            let k = level * Self.height
            guard k < levels.count else { break }
            let nodes = n >> k
            guard nodes > 0 else { break }
            for index in 0...(nodes / Self.width) {
                let start = index * Self.width
                let count = min(Self.width, nodes - start)
                guard count > 0 else { continue }
                tiles.append((Self.path(level: level, index: index, width: count), levels[k][start..<(start + count)].flatMap { $0 }))
            }
            level += 1
        }
        return tiles
    }

    /// `tile/L/N[.p/W]`, N in groups of three digits, each but the last after an `x`.
    public static func path(level: Int, index: Int, width: Int = width) -> String {
        "tile/\(level)/" + indexPath(index) + (width < Self.width ? ".p/\(width)" : "")
    }

    /// `x001/x234/067` for 1234067.
    static func indexPath(_ index: Int) -> String {
        var groups: [String] = []
        var rest = index
        repeat {
            groups.insert(String(format: "%03d", rest % 1000), at: 0)
            rest /= 1000
        } while rest > 0
        return groups.dropLast().map { "x" + $0 }.joined(separator: "/") + (groups.count > 1 ? "/" : "") + groups.last!
    }

    static func sha256(_ bytes: [UInt8]) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: 32)
        _ = SHA256(bytes, bytes.count, &digest)
        return digest
    }
}

extension TileTree {
    /// The inclusion proof of leaf `index` in the tree's first `size` leaves (RFC 9162
    /// §2.1.3.1: the audit path, nearest sibling first).
    public func inclusionProof(index: Int, size: Int) -> [[UInt8]] {
        precondition(index >= 0 && index < size && size <= self.size)
        return Self.inclusionProof(index: index, size: size, subtree: subtree)
    }

    /// The consistency proof from the tree's first `old` leaves to its first `new` (RFC 9162
    /// §2.1.4.1).
    public func consistencyProof(old: Int, new: Int) -> [[UInt8]] {
        precondition(old >= 0 && old <= new && new <= self.size)
        return Self.consistencyProof(old: old, new: new, subtree: subtree)
    }

    /// RFC 9162's audit path over any source of subtree hashes (MTH of leaves lo..<hi).
    static func inclusionProof(index: Int, size: Int, subtree: (Int, Int) throws -> [UInt8]) rethrows -> [[UInt8]] {
        func path(_ m: Int, _ lo: Int, _ hi: Int) throws -> [[UInt8]] {
            let n = hi - lo
            guard n > 1 else { return [] }
            let k = Self.largestPowerOfTwo(below: n)
            return m < k ? try path(m, lo, lo + k) + [try subtree(lo + k, hi)] : try path(m - k, lo + k, hi) + [try subtree(lo, lo + k)]
        }
        return try path(index, 0, size)
    }

    /// RFC 9162's consistency proof over any source of subtree hashes.
    static func consistencyProof(old: Int, new: Int, subtree: (Int, Int) throws -> [UInt8]) rethrows -> [[UInt8]] {
        guard old > 0, old < new else { return [] }
        func subproof(_ m: Int, _ lo: Int, _ hi: Int, _ complete: Bool) throws -> [[UInt8]] {
            let n = hi - lo
            if m == n { return complete ? [] : [try subtree(lo, hi)] }
            let k = Self.largestPowerOfTwo(below: n)
            return m <= k
                ? try subproof(m, lo, lo + k, complete) + [try subtree(lo + k, hi)] : try subproof(m - k, lo + k, hi, false) + [try subtree(lo, lo + k)]
        }
        return try subproof(old, 0, new, true)
    }

    /// Whether `proof` shows the leaf hash `leaf` at `index` in a tree of `size` leaves whose
    /// root is `root` (RFC 9162 §2.1.3.2).
    public static func verifyInclusion(leaf: [UInt8], index: Int, size: Int, proof: [[UInt8]], root: [UInt8]) -> Bool {
        guard index >= 0, index < size, proof.allSatisfy({ $0.count == 32 }) else { return false }
        var fn = index, sn = size - 1
        var r = leaf
        for p in proof {
            guard sn > 0 else { return false }
            if fn & 1 == 1 || fn == sn {
                r = nodeHash(p, r)
                climb(&fn, &sn)
            } else {
                r = nodeHash(r, p)
            }
            fn >>= 1
            sn >>= 1
        }
        return sn == 0 && r == root
    }

    /// Whether `proof` shows the tree of `old` leaves with root `oldRoot` to be the first
    /// leaves of the tree of `new` leaves with root `newRoot` (RFC 9162 §2.1.4.2).
    public static func verifyConsistency(old: Int, new: Int, oldRoot: [UInt8], newRoot: [UInt8], proof: [[UInt8]]) -> Bool {
        guard old >= 0, old <= new, proof.allSatisfy({ $0.count == 32 }) else { return false }
        if old == new { return proof.isEmpty && oldRoot == newRoot }
        if old == 0 { return proof.isEmpty }
        var path = proof
        if old & (old - 1) == 0 { path.insert(oldRoot, at: 0) }
        guard !path.isEmpty else { return false }
        var fn = old - 1, sn = new - 1
        while fn & 1 == 1 {
            fn >>= 1
            sn >>= 1
        }
        var fr = path[0], sr = path[0]
        for c in path.dropFirst() {
            guard sn > 0 else { return false }
            if fn & 1 == 1 || fn == sn {
                fr = nodeHash(c, fr)
                sr = nodeHash(c, sr)
                climb(&fn, &sn)
            } else {
                sr = nodeHash(sr, c)
            }
            fn >>= 1
            sn >>= 1
        }
        return fr == oldRoot && sr == newRoot && sn == 0
    }

    /// RFC 9162's step after a hash from the left on the tree's right edge: unless `fn` is
    /// odd, both shift right until it is, or is 0.
    private static func climb(_ fn: inout Int, _ sn: inout Int) {
        guard fn & 1 == 0 else { return }
        repeat {
            fn >>= 1
            sn >>= 1
        } while fn & 1 == 0 && fn != 0
    }

    /// The largest power of two below `n` (n ≥ 2).
    static func largestPowerOfTwo(below n: Int) -> Int { 1 << (Int.bitWidth - 1 - (n - 1).leadingZeroBitCount) }
}
