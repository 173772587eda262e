"""ICD-9-CM diagnosis classification above the code: chapter -> section -> three-digit category.

The section table is the published one of the ICD-9-CM tabular list (volume 1, FY2012 / version 32, the
last release): each section is a range of three-digit categories (``V`` + 2 digits for the V codes,
``E`` + 3 digits for the E codes) with its title. Some ranges hold one category (``042``, ``338``,
``V85``, ``E000``); a few numbers fall between sections (``043``, ``400``, ``544``, ...): no code uses
them. The chapters are :data:`ontology_compiler.icd.ICD9_CHAPTERS` (1-17 by number, 18 the V codes, 19 the
E codes); their titles are :data:`ICD9_CHAPTER_TITLES`.

:func:`icd9_levels` gives, for dotless codes as MIMIC-IV writes them (``25000``, ``V5861``, ``E8798``),
the chapter, the section and the category of each, columnarly.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import icd

ICD9_CHAPTER_TITLES: dict[int, str] = {
    1: "Infectious and parasitic diseases",
    2: "Neoplasms",
    3: "Endocrine, nutritional and metabolic diseases, and immunity disorders",
    4: "Diseases of the blood and blood-forming organs",
    5: "Mental disorders",
    6: "Diseases of the nervous system and sense organs",
    7: "Diseases of the circulatory system",
    8: "Diseases of the respiratory system",
    9: "Diseases of the digestive system",
    10: "Diseases of the genitourinary system",
    11: "Complications of pregnancy, childbirth, and the puerperium",
    12: "Diseases of the skin and subcutaneous tissue",
    13: "Diseases of the musculoskeletal system and connective tissue",
    14: "Congenital anomalies",
    15: "Certain conditions originating in the perinatal period",
    16: "Symptoms, signs, and ill-defined conditions",
    17: "Injury and poisoning",
    18: "Supplementary classification of factors influencing health status and contact with health services",
    19: "Supplementary classification of external causes of injury and poisoning",
}
ICD9_CHAPTER_RANGES: dict[int, str] = {
    **{ch: f"{lo:03d}-{hi:03d}" for lo, hi, ch in icd.ICD9_CHAPTERS},
    icd.ICD9_CHAPTER_V: "V01-V91",
    icd.ICD9_CHAPTER_E: "E000-E999",
}

# (first category, last category, title), in code order: numeric sections, then V, then E.
ICD9_SECTIONS: list[tuple[str, str, str]] = [
    # 1 Infectious and parasitic diseases
    ("001", "009", "Intestinal infectious diseases"),
    ("010", "018", "Tuberculosis"),
    ("020", "027", "Zoonotic bacterial diseases"),
    ("030", "041", "Other bacterial diseases"),
    ("042", "042", "Human immunodeficiency virus (HIV) infection"),
    ("045", "049", "Poliomyelitis and other non-arthropod-borne viral diseases and prion diseases of "
                   "central nervous system"),
    ("050", "059", "Viral diseases generally accompanied by exanthem"),
    ("060", "066", "Arthropod-borne viral diseases"),
    ("070", "079", "Other diseases due to viruses and Chlamydiae"),
    ("080", "088", "Rickettsioses and other arthropod-borne diseases"),
    ("090", "099", "Syphilis and other venereal diseases"),
    ("100", "104", "Other spirochetal diseases"),
    ("110", "118", "Mycoses"),
    ("120", "129", "Helminthiases"),
    ("130", "136", "Other infectious and parasitic diseases"),
    ("137", "139", "Late effects of infectious and parasitic diseases"),
    # 2 Neoplasms
    ("140", "149", "Malignant neoplasm of lip, oral cavity, and pharynx"),
    ("150", "159", "Malignant neoplasm of digestive organs and peritoneum"),
    ("160", "165", "Malignant neoplasm of respiratory and intrathoracic organs"),
    ("170", "176", "Malignant neoplasm of bone, connective tissue, skin, and breast"),
    ("179", "189", "Malignant neoplasm of genitourinary organs"),
    ("190", "199", "Malignant neoplasm of other and unspecified sites"),
    ("200", "208", "Malignant neoplasm of lymphatic and hematopoietic tissue"),
    ("209", "209", "Neuroendocrine tumors"),
    ("210", "229", "Benign neoplasms"),
    ("230", "234", "Carcinoma in situ"),
    ("235", "238", "Neoplasms of uncertain behavior"),
    ("239", "239", "Neoplasms of unspecified nature"),
    # 3 Endocrine, nutritional and metabolic diseases, and immunity disorders
    ("240", "246", "Disorders of thyroid gland"),
    ("249", "259", "Diseases of other endocrine glands"),
    ("260", "269", "Nutritional deficiencies"),
    ("270", "279", "Other metabolic and immunity disorders"),
    # 4 Diseases of the blood and blood-forming organs (one section)
    ("280", "289", "Diseases of the blood and blood-forming organs"),
    # 5 Mental disorders
    ("290", "294", "Organic psychotic conditions"),
    ("295", "299", "Other psychoses"),
    ("300", "316", "Neurotic disorders, personality disorders, and other nonpsychotic mental disorders"),
    ("317", "319", "Intellectual disabilities"),
    # 6 Diseases of the nervous system and sense organs
    ("320", "327", "Inflammatory diseases of the central nervous system"),
    ("330", "337", "Hereditary and degenerative diseases of the central nervous system"),
    ("338", "338", "Pain"),
    ("339", "339", "Other headache syndromes"),
    ("340", "349", "Other disorders of the central nervous system"),
    ("350", "359", "Disorders of the peripheral nervous system"),
    ("360", "379", "Disorders of the eye and adnexa"),
    ("380", "389", "Diseases of the ear and mastoid process"),
    # 7 Diseases of the circulatory system
    ("390", "392", "Acute rheumatic fever"),
    ("393", "398", "Chronic rheumatic heart disease"),
    ("401", "405", "Hypertensive disease"),
    ("410", "414", "Ischemic heart disease"),
    ("415", "417", "Diseases of pulmonary circulation"),
    ("420", "429", "Other forms of heart disease"),
    ("430", "438", "Cerebrovascular disease"),
    ("440", "449", "Diseases of arteries, arterioles, and capillaries"),
    ("451", "459", "Diseases of veins and lymphatics, and other diseases of circulatory system"),
    # 8 Diseases of the respiratory system
    ("460", "466", "Acute respiratory infections"),
    ("470", "478", "Other diseases of the upper respiratory tract"),
    ("480", "488", "Pneumonia and influenza"),
    ("490", "496", "Chronic obstructive pulmonary disease and allied conditions"),
    ("500", "508", "Pneumoconioses and other lung diseases due to external agents"),
    ("510", "519", "Other diseases of respiratory system"),
    # 9 Diseases of the digestive system
    ("520", "529", "Diseases of oral cavity, salivary glands, and jaws"),
    ("530", "539", "Diseases of esophagus, stomach, and duodenum"),
    ("540", "543", "Appendicitis"),
    ("550", "553", "Hernia of abdominal cavity"),
    ("555", "558", "Noninfectious enteritis and colitis"),
    ("560", "569", "Other diseases of intestines and peritoneum"),
    ("570", "579", "Other diseases of digestive system"),
    # 10 Diseases of the genitourinary system
    ("580", "589", "Nephritis, nephrotic syndrome, and nephrosis"),
    ("590", "599", "Other diseases of urinary system"),
    ("600", "608", "Diseases of male genital organs"),
    ("610", "612", "Disorders of breast"),
    ("614", "616", "Inflammatory disease of female pelvic organs"),
    ("617", "629", "Other disorders of female genital tract"),
    # 11 Complications of pregnancy, childbirth, and the puerperium
    ("630", "633", "Ectopic and molar pregnancy"),
    ("634", "639", "Other pregnancy with abortive outcome"),
    ("640", "649", "Complications mainly related to pregnancy"),
    ("650", "659", "Normal delivery, and other indications for care in pregnancy, labor, and delivery"),
    ("660", "669", "Complications occurring mainly in the course of labor and delivery"),
    ("670", "677", "Complications of the puerperium"),
    ("678", "679", "Other maternal and fetal complications"),
    # 12 Diseases of the skin and subcutaneous tissue
    ("680", "686", "Infections of skin and subcutaneous tissue"),
    ("690", "698", "Other inflammatory conditions of skin and subcutaneous tissue"),
    ("700", "709", "Other diseases of skin and subcutaneous tissue"),
    # 13 Diseases of the musculoskeletal system and connective tissue
    ("710", "719", "Arthropathies and related disorders"),
    ("720", "724", "Dorsopathies"),
    ("725", "729", "Rheumatism, excluding the back"),
    ("730", "739", "Osteopathies, chondropathies, and acquired musculoskeletal deformities"),
    # 14 Congenital anomalies (one section)
    ("740", "759", "Congenital anomalies"),
    # 15 Certain conditions originating in the perinatal period
    ("760", "763", "Maternal causes of perinatal morbidity and mortality"),
    ("764", "779", "Other conditions originating in the perinatal period"),
    # 16 Symptoms, signs, and ill-defined conditions
    ("780", "789", "Symptoms"),
    ("790", "796", "Nonspecific abnormal findings"),
    ("797", "799", "Ill-defined and unknown causes of morbidity and mortality"),
    # 17 Injury and poisoning
    ("800", "804", "Fracture of skull"),
    ("805", "809", "Fracture of neck and trunk"),
    ("810", "819", "Fracture of upper limb"),
    ("820", "829", "Fracture of lower limb"),
    ("830", "839", "Dislocation"),
    ("840", "848", "Sprains and strains of joints and adjacent muscles"),
    ("850", "854", "Intracranial injury, excluding those with skull fracture"),
    ("860", "869", "Internal injury of thorax, abdomen, and pelvis"),
    ("870", "879", "Open wound of head, neck, and trunk"),
    ("880", "887", "Open wound of upper limb"),
    ("890", "897", "Open wound of lower limb"),
    ("900", "904", "Injury to blood vessels"),
    ("905", "909", "Late effects of injuries, poisonings, toxic effects, and other external causes"),
    ("910", "919", "Superficial injury"),
    ("920", "924", "Contusion with intact skin surface"),
    ("925", "929", "Crushing injury"),
    ("930", "939", "Effects of foreign body entering through orifice"),
    ("940", "949", "Burns"),
    ("950", "957", "Injury to nerves and spinal cord"),
    ("958", "959", "Certain traumatic complications and unspecified injuries"),
    ("960", "979", "Poisoning by drugs, medicinal and biological substances"),
    ("980", "989", "Toxic effects of substances chiefly nonmedicinal as to source"),
    ("990", "995", "Other and unspecified effects of external causes"),
    ("996", "999", "Complications of surgical and medical care, not elsewhere classified"),
    # 18 V codes: factors influencing health status and contact with health services
    ("V01", "V09", "Persons with potential health hazards related to communicable diseases"),
    ("V10", "V19", "Persons with potential health hazards related to personal and family history"),
    ("V20", "V29", "Persons encountering health services in circumstances related to reproduction and "
                   "development"),
    ("V30", "V39", "Liveborn infants according to type of birth"),
    ("V40", "V49", "Persons with a condition influencing their health status"),
    ("V50", "V59", "Persons encountering health services for specific procedures and aftercare"),
    ("V60", "V69", "Persons encountering health services in other circumstances"),
    ("V70", "V82", "Persons without reported diagnosis encountered during examination and investigation of "
                   "individuals and populations"),
    ("V83", "V84", "Genetics"),
    ("V85", "V85", "Body mass index"),
    ("V86", "V86", "Estrogen receptor status"),
    ("V87", "V87", "Other specified personal exposures and history presenting hazards to health"),
    ("V88", "V88", "Acquired absence of other organs and tissue"),
    ("V89", "V89", "Other suspected conditions not found"),
    ("V90", "V90", "Retained foreign body"),
    ("V91", "V91", "Multiple gestation placenta status"),
    # 19 E codes: external causes of injury and poisoning
    ("E000", "E000", "External cause status"),
    ("E001", "E030", "Activity"),
    ("E800", "E807", "Railway accidents"),
    ("E810", "E819", "Motor vehicle traffic accidents"),
    ("E820", "E825", "Motor vehicle nontraffic accidents"),
    ("E826", "E829", "Other road vehicle accidents"),
    ("E830", "E838", "Water transport accidents"),
    ("E840", "E845", "Air and space transport accidents"),
    ("E846", "E849", "Vehicle accidents not elsewhere classifiable"),
    ("E850", "E858", "Accidental poisoning by drugs, medicinal substances, and biologicals"),
    ("E860", "E869", "Accidental poisoning by other solid and liquid substances, gases, and vapors"),
    ("E870", "E876", "Misadventures to patients during surgical and medical care"),
    ("E878", "E879", "Surgical and medical procedures as the cause of abnormal reaction of patient or later "
                     "complication, without mention of misadventure at the time of procedure"),
    ("E880", "E888", "Accidental falls"),
    ("E890", "E899", "Accidents caused by fire and flames"),
    ("E900", "E909", "Accidents due to natural and environmental factors"),
    ("E910", "E915", "Accidents caused by submersion, suffocation, and foreign bodies"),
    ("E916", "E928", "Other accidents"),
    ("E929", "E929", "Late effects of accidental injury"),
    ("E930", "E949", "Drugs, medicinal and biological substances causing adverse effects in therapeutic use"),
    ("E950", "E959", "Suicide and self-inflicted injury"),
    ("E960", "E969", "Homicide and injury purposely inflicted by other persons"),
    ("E970", "E979", "Legal intervention"),
    ("E980", "E989", "Injury undetermined whether accidentally or purposely inflicted"),
    ("E990", "E999", "Injury resulting from operations of war"),
]  # fmt: skip


def section_name(first: str, last: str) -> str:
    """A section's name: its range (``249-259``), or its one category (``042``)."""
    return first if first == last else f"{first}-{last}"


def category_of(codes: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The three-digit category of each dotless ICD-9-CM code (``25000`` -> ``250``, ``V5861`` -> ``V58``,
    ``E8798`` -> ``E879``); null for a value that is not an ICD-9-CM diagnosis code."""
    codes = icd.dotless(codes)
    e_code = pc.starts_with(codes, "E")
    head = pc.if_else(e_code, pc.utf8_slice_codeunits(codes, 0, 4), pc.utf8_slice_codeunits(codes, 0, 3))
    valid = pc.match_substring_regex(head, r"^([0-9]{3}|V[0-9]{2}|E[0-9]{3})$")
    return pc.if_else(valid, head, pa.scalar(None, pa.string()))


def icd9_levels(codes: pa.Array | pa.ChunkedArray) -> pa.Table:
    """Chapter (int8), section (its :func:`section_name`) and category of each dotless ICD-9-CM code, null
    where there is none (a number between sections has a chapter but no section; a malformed code none).

    Shapes: ``codes`` (N,) -> a table of N rows with columns ``chapter``, ``section``, ``category``."""
    category = category_of(codes)
    chapter = icd.chapters(pc.fill_null(category, ""), icd.ICD9CM)
    chapter = pc.if_else(pc.is_valid(category), chapter, pa.scalar(None, pa.int8()))
    firsts = np.array([s[0] for s in ICD9_SECTIONS])
    order = np.argsort(firsts, kind="stable")
    firsts, lasts = firsts[order], np.array([s[1] for s in ICD9_SECTIONS])[order]
    names = np.array([section_name(s[0], s[1]) for s in ICD9_SECTIONS], dtype=object)[order]
    cat = np.asarray(pc.fill_null(category, "").to_pylist(), dtype=object).astype(str)
    i = np.searchsorted(firsts, cat, side="right") - 1
    inside = (i >= 0) & (cat != "")
    j = np.maximum(i, 0)
    # within one family (numeric, V, E) categories have one length, so string order is numeric order
    inside &= (np.char.str_len(cat) == np.char.str_len(lasts[j])) & (cat <= lasts[j])
    section = pa.array(np.where(inside, names[j], None).tolist(), pa.string())
    return pa.table({"chapter": chapter, "section": section, "category": category})


def section_titles() -> dict[str, str]:
    """Section name -> title, as the node labels show it: ``Diseases of other endocrine glands (249-259)``."""
    return {section_name(a, b): f"{t} ({section_name(a, b)})" for a, b, t in ICD9_SECTIONS}


def chapter_titles() -> dict[int, str]:
    """Chapter number -> title with its range: ``Mental disorders (290-319)``."""
    return {ch: f"{t} ({ICD9_CHAPTER_RANGES[ch]})" for ch, t in ICD9_CHAPTER_TITLES.items()}
