import SignetCore
import SignetArchive

/// An archive input whose bytes cost a request to fetch (a package read over HTTP range
/// requests, or the signed package inside an encrypted one read that way): the caller says
/// ahead which byte ranges it will read, so that they arrive in a few large requests instead
/// of one per read.
package protocol PlannedInput: ArchiveInput {
    /// Ranges that will be read: merged with each other where closer than `gap` (a gap read
    /// through costs less than another request), and asked for several to a request where
    /// closer than `exactGap` apart.
    func plan(_ ranges: [Range<Int64>], gap: Int64, exactGap: Int64)
}

extension PlannedInput {
    /// ``plan(_:gap:exactGap:)`` with resources' gaps (``RangedInput/gapLimit``; a part's own
    /// overhead, ``RangedInput/partOverhead``, unless said).
    package func plan(_ ranges: [Range<Int64>], exactGap: Int64 = RangedInput.partOverhead) {
        plan(ranges, gap: RangedInput.gapLimit, exactGap: exactGap)
    }

    /// The package's own entries other than per-file signatures and the chunk-index entry
    /// (manifest, its signature, the record's signature, certificates), which an update reads
    /// whole, and where they start (the first `.signet/` entry; the directory when the
    /// package is laid out otherwise, a bare one or another tool's).
    package static func ownEntries(of directory: CentralDirectory.Directory) -> (floor: Int64, spans: [Range<Int64>]) {
        let signet = Array((TreeLayout.directory + "/").utf8)
        var firstOwn = Int64(directory.offset), lastResourceEnd: Int64 = 0
        for record in directory {
            let offset = Int64(record.localHeaderOffset)
            if directory.name(of: record).starts(with: signet) {
                firstOwn = min(firstOwn, offset)
            } else {
                lastResourceEnd = max(lastResourceEnd, offset + 1)
            }
        }
        let floor = lastResourceEnd <= firstOwn ? firstOwn : Int64(directory.offset)
        let signatures = Array((TreeLayout.signatures + "/").utf8)
        var own: [Range<Int64>] = []
        for position in directory.startIndex..<directory.endIndex {
            let name = directory.name(of: directory[position])
            // The chunk-index entry is read by range, only where an update needs it.
            guard name.starts(with: signet), !name.starts(with: signatures), !name.elementsEqual(TreeLayout.chunkIndex.utf8),
                let span = directory.span(ofRecord: position)
            else { continue }
            own.append(Int64(span.lowerBound)..<Int64(span.upperBound))
        }
        return (floor, own)
    }
}
